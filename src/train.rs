//! GRPO trainer. Not built yet: a later issue.
