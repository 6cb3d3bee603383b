//! Collision model, RRT-Connect, time parameterisation. Not built yet: a later issue.
