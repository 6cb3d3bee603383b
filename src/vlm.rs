//! Qwen2.5-VL (Embodied-R1-3B) on candle. Not built yet: issue 4.
