//! (placeholder: tx)
