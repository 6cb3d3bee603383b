//! Robot drivers behind one trait (xArm, WidowX, sim). Not built yet: issue 3 and later.
