//! `extalloc.lab`: the allocation lab from Python. [`run`] runs a workload's matrix in
//! memory (as `extalloc bench WORKLOAD`, same defaults) and [`replay`] a kernel trace;
//! each returns the report's runs as plain records (a list of flat dicts, one per policy x
//! threads run, each with its `workload`, nested figures as `layout.extents_per_file`)
//! that `pandas.DataFrame` takes as they are.
//!
//! Data structures: none of its own (`extalloc_lab::api`). Invariant: the GIL is let go
//! for the whole run, so other Python threads go on. Errors raise `extalloc.Error` with
//! the lab's message (an unknown workload lists the known ones).

use crate::exceptions::Error;
use extalloc_lab::api::{self, Params};
use extalloc_lab::lab::report::Report;
use pyo3::prelude::*;
use pyo3::types::PyList;
use serde_json::Value;
use std::path::PathBuf;

/// `policies` or `threads` as Python gave it: a string, a number, or a list of either.
fn comma_list(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    let Some(v) = v else { return Ok(None) };
    if let Ok(s) = v.extract::<String>() {
        return Ok(Some(s));
    }
    if let Ok(n) = v.extract::<u64>() {
        return Ok(Some(n.to_string()));
    }
    let items: Vec<Bound<'_, PyAny>> = v.extract()?;
    let parts: Vec<String> = items
        .iter()
        .map(|i| i.str().map(|s| s.to_string()))
        .collect::<PyResult<_>>()?;
    Ok(Some(parts.join(",")))
}

/// `v`'s fields into `out`, a nested object's as `outer.inner` (lists stay whole).
fn flatten(prefix: &str, v: serde_json::Value, out: &mut serde_json::Map<String, Value>) {
    match v {
        Value::Object(o) => {
            for (k, v) in o {
                let key = match prefix {
                    "" => k,
                    p => format!("{p}.{k}"),
                };
                flatten(&key, v, out);
            }
        }
        other => {
            out.insert(prefix.to_string(), other);
        }
    }
}

/// The report's runs as flat Python records (nested figures as `layout.extents_per_file`),
/// each with the workload's name.
fn records<'py>(py: Python<'py>, report: &Report) -> PyResult<Bound<'py, PyList>> {
    let mut runs = Vec::with_capacity(report.runs.len());
    for run in &report.runs {
        let v = serde_json::to_value(run).map_err(|e| Error::new_err(e.to_string()))?;
        let mut flat = serde_json::Map::new();
        flat.insert("workload".into(), report.workload.clone().into());
        flatten("", v, &mut flat);
        runs.push(Value::Object(flat));
    }
    let text = serde_json::to_string(&runs).map_err(|e| Error::new_err(e.to_string()))?;
    let loaded = py.import("json")?.call_method1("loads", (text,))?;
    Ok(loaded.cast_into::<PyList>()?)
}

/// The names of the workloads `run` takes.
#[pyfunction]
fn workloads() -> Vec<&'static str> {
    api::workloads()
}

/// Runs `workload`'s matrix in memory (as `extalloc bench`); returns its runs as records.
#[pyfunction]
#[pyo3(signature = (workload, *, policies=None, threads=None, seconds=None, repeat=None,
    device_size=None, file_size=None, seed=None))]
#[allow(clippy::too_many_arguments)] // Python's keyword arguments, one per option
fn run<'py>(
    py: Python<'py>,
    workload: &str,
    policies: Option<&Bound<'py, PyAny>>,
    threads: Option<&Bound<'py, PyAny>>,
    seconds: Option<f64>,
    repeat: Option<usize>,
    device_size: Option<String>,
    file_size: Option<String>,
    seed: Option<u64>,
) -> PyResult<Bound<'py, PyList>> {
    let p = Params {
        policies: comma_list(policies)?,
        threads: comma_list(threads)?,
        seconds,
        repeat,
        device_size,
        file_size,
        seed,
    };
    let report = py
        .detach(|| api::run(workload, &p))
        .map_err(|e| Error::new_err(format!("{e:#}")))?;
    records(py, &report)
}

/// Replays kernel trace `trace` through `policies` beside the kernel's own decisions;
/// returns the runs as records (the kernel's row has policy `kernel`).
#[pyfunction]
#[pyo3(signature = (trace, *, policies=None))]
fn replay<'py>(
    py: Python<'py>,
    trace: PathBuf,
    policies: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyList>> {
    let policies = comma_list(policies)?;
    let report = py
        .detach(|| api::replay(&trace, policies.as_deref()))
        .map_err(|e| Error::new_err(format!("{e:#}")))?;
    records(py, &report)
}

/// Adds the submodule `lab` to `parent`.
pub(crate) fn add(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let m = PyModule::new(parent.py(), "lab")?;
    m.add_function(wrap_pyfunction!(workloads, &m)?)?;
    m.add_function(wrap_pyfunction!(run, &m)?)?;
    m.add_function(wrap_pyfunction!(replay, &m)?)?;
    parent.add_submodule(&m)
}
