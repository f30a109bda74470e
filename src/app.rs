//! Mode orchestration (being written).
use crate::error::Result;
/// Runs the configured mode.
pub fn run(_c: &crate::cli::Config) -> Result<()> {
    Ok(())
}
