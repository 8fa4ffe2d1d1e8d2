//! [`IoSource`]: an operating system's error inside an [`Error`](super::Error).

/// The `std::io::Error` behind an [`Error::Io`](super::Error::Io) or an
/// [`Error::Spawn`](super::Error::Spawn), shared so that errors stay `Clone`; compared by
/// kind and text.
#[derive(Debug, Clone)]
pub struct IoSource(pub std::sync::Arc<std::io::Error>);

impl IoSource {
    /// Wraps `e` for an [`Error::Io`](super::Error::Io).
    pub fn new(e: std::io::Error) -> Self {
        IoSource(std::sync::Arc::new(e))
    }

    /// The kind of the operating system's error.
    pub fn kind(&self) -> std::io::ErrorKind {
        self.0.kind()
    }
}

impl std::fmt::Display for IoSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for IoSource {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

impl PartialEq for IoSource {
    fn eq(&self, other: &Self) -> bool {
        self.0.kind() == other.0.kind() && self.0.to_string() == other.0.to_string()
    }
}

impl Eq for IoSource {}
