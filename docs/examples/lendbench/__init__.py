"""lendbench: a small tool-use benchmark of a library lending desk, in the shape many public ones have.

Its data is nested dicts, its tools are classes with `invoke(data, **kwargs)` that
mutate the data and answer strings ("Error: ..." on failure), its tasks are dicts
with integer positions, a hidden second-person instruction, gold actions and
outputs. It knows nothing of Faultline; `lendbench_faultline.py` wraps it.
"""
