"""How a call of a transformed function reaches its program: the machinery of the public API.

The API stage, above the runtime: `transformed.py` holds `Transformed` (split the call's
arguments, derive the graph with trace.py, autodiff.py and the transforms, look the program up in
the store of runtime/program_store.py or build it); `arguments.py` checks and names a call's arguments.
api.py and api_transforms.py make the public transforms out of them.
"""
