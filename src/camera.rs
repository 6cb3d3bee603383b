//! Frames in: RealSense, recorded-frame folders, the simulator. Not built yet: issues 3 and 5.
