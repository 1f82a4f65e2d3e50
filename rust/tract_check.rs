//! (in progress)
/// The tract version linked in.
pub const TRACT_VERSION: &str = "0.23.9";
