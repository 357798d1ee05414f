"""Graph-to-graph transforms beside reverse mode (autodiff.py), in the order the pipeline uses them.

- `forward`: forward mode (jvp, jacfwd), derived from the adjoint by transposition;
- `batching`: vmap, a leading batch axis through each primitive's batching rule;
- `partial_eval`: splitting a graph into what is known now and what waits for tangents or
  cotangents (linearize, vjp);
- `remat`: checkpointing, recomputing a function's internals in the backward pass;
- `custom_jvp`: user-written forward-mode rules;
- `loops` (loop, while, cond), `scan`: structured control flow as primitives holding graphs,
  with their rules; `packing`: their several results in one value; `bodies`: what the rules
  share about the graphs they hold; `rolling`: repeated iterations of a Python loop as one scan.

Each takes graphs and returns graphs; none of them runs anything.
"""
