//! The one gate every motion passes. Not built yet: issue 3.
