//! (placeholder: cli)
