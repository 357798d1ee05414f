"""How a call of a transformed function reaches its program: the machinery of the public API.

The API stage, above the runtime: `transformed.py` holds `Transformed` (split the call's
arguments, look the program up in the store of runtime/program_store.py, or load one an earlier
process persisted); `derive.py` the miss path, one function that reads top to bottom (trace and
derive the graph with trace.py, autodiff.py and the transforms, optimise, compile, keep,
persist), loaded on the first miss; `arguments.py` checks and names a call's arguments. api.py
and api_transforms.py make the public transforms out of them.
"""
