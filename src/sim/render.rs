//! Ray-cast RGB-D + segmentation camera (being built).
