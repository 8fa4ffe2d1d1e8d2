//! The committed header, `include/extalloc.h`, is what cbindgen makes from the sources
//! now: regenerated in memory and compared byte for byte. `EXTALLOC_BLESS=1` writes it
//! instead (after changing a public item or its doc comment).

use std::path::Path;

#[test]
fn header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut fresh = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not read the sources")
        .write(&mut fresh);
    let path = dir.join("include/extalloc.h");
    if std::env::var_os("EXTALLOC_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("writing include/extalloc.h");
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    if committed != fresh {
        let tmp = std::env::temp_dir().join(format!("extalloc-{}.h", std::process::id()));
        std::fs::write(&tmp, &fresh).expect("writing the fresh header");
        panic!(
            "{} is stale: the sources make {} (diff them); run \
             `EXTALLOC_BLESS=1 cargo test -p extalloc-capi --test header` and commit it",
            path.display(),
            tmp.display()
        );
    }
}
