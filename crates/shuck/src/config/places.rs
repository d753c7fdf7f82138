//! Where each option of a configuration file stands (file and line), kept with the parsed
//! command line so that an error found only once the whole configuration is built still
//! names its line. Shared by the file reader, which fills it, and the option table, which
//! carries it.

use std::path::PathBuf;

/// Where the flags a file gave came from, so that an error found only once the whole
/// configuration is built (`--acme-*`, `--shared-store`, ...) still names the file and line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyPlaces {
    /// The file.
    pub path: PathBuf,
    /// Each flag (`--acme-directory`) and the line of the key it came from, in file order.
    pub(crate) lines: Vec<(String, usize)>,
}

impl KeyPlaces {
    /// The line of the first key that gave `flag` (e.g. `--shared-store`).
    pub fn line_of(&self, flag: &str) -> Option<usize> {
        self.lines.iter().find(|(f, _)| f == flag).map(|&(_, l)| l)
    }

    /// The line of the `index`-th key (from 0) that gave `flag`, when the file gave it.
    pub fn nth_line(&self, flag: &str, index: usize) -> Option<usize> {
        self.lines
            .iter()
            .filter(|(f, _)| f == flag)
            .nth(index)
            .map(|&(_, l)| l)
    }
}
