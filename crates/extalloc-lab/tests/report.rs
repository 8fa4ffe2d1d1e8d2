//! `extalloc report` (`extalloc_lab::command::report`) on a small fixture (a frag run of
//! extalloc and tlsf at 1 and 2 jobs): the files exist, the PNGs decode, and the Markdown
//! has a row per run in each table.

use extalloc_lab::command::report;

#[test]
fn report_writes_markdown_and_decodable_charts() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/frag-report.json"
    );
    let out = std::env::temp_dir().join(format!("extalloc-report-{}", std::process::id()));
    report(fixture.as_ref(), &out).unwrap();
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let rows = md
        .lines()
        .filter(|l| l.starts_with("| extalloc |") || l.starts_with("| tlsf |"))
        .count();
    assert_eq!(rows, 2 * 4, "{md}");
    let pngs = [
        "throughput.png",
        "free-histogram.png",
        "free-map-extalloc-1.png",
        "free-map-extalloc-2.png",
        "free-map-tlsf-1.png",
        "free-map-tlsf-2.png",
    ];
    for name in pngs {
        assert!(md.contains(&format!("]({name})")), "{name} linked");
        let file = std::fs::File::open(out.join(name)).unwrap();
        let mut reader = png::Decoder::new(std::io::BufReader::new(file))
            .read_info()
            .unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let frame = reader.next_frame(&mut buf).unwrap();
        assert!(frame.width > 100 && frame.height > 50, "{name}");
        // Not a blank image: some pixel differs from the first.
        let px = frame.color_type.samples();
        assert!(
            buf[..frame.buffer_size()]
                .chunks(px)
                .any(|p| p != &buf[..px]),
            "{name} is blank"
        );
    }
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn report_refuses_what_is_not_a_report() {
    let path = std::env::temp_dir().join(format!("extalloc-notreport-{}.json", std::process::id()));
    std::fs::write(&path, "{\"schema\": 3}").unwrap();
    let out = std::env::temp_dir().join(format!("extalloc-notreport-{}", std::process::id()));
    let e = report(&path, &out).unwrap_err();
    assert!(format!("{e:#}").contains("not a bench report"), "{e:#}");
    std::fs::remove_file(&path).unwrap();
}
