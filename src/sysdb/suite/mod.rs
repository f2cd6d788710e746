//! The shared store suite (filled in below).
