//! Instruction to plan: affordance branch (-P) and visual-trace branch (-V). Not built yet: issue 3.
