//! Built-in tabletop simulator. Not built yet: issue 3.
