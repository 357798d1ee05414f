"""autograd.builtins: autograd boxes containers; tracegrad's traced values live in Python's own
containers, so these are Python's."""

import builtins as _builtins

dict = _builtins.dict
list = _builtins.list
tuple = _builtins.tuple


def isinstance(obj, types) -> bool:
    """Python's isinstance, with a traced value counted as an np.ndarray (autograd's boxes are)."""
    import numpy as np

    from .tracer import isbox

    if isbox(obj):
        types = types if _builtins.isinstance(types, tuple) else (types,)
        if any(t is np.ndarray for t in types):
            return True
    return _builtins.isinstance(obj, types)


type = _builtins.type
SequenceBox = None
DictBox = None
