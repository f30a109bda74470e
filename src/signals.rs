//! (placeholder: signals)
