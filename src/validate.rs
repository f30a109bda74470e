//! (placeholder: validate)
