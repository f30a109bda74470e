//! (placeholder: app)
