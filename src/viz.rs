//! rerun logging. Not built yet: issue 5.
