"""Targets that need CUDA (run them on a GPU machine, under ``dlwatch run``)."""
