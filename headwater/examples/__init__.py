"""Runnable examples; ``headwater demo`` is the README's main job."""
