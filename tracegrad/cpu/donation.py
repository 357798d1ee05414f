"""Buffer donation: a fused loop writes its result into an operand's buffer once that operand is
dead, instead of into a buffer of its own (a step of the fusion plan, after planning; cpu).

NumPy code that updates arrays in place (`y[idx] = v`, `y += 1`) traces to functional updates:
each update makes a new value from the old one. Where the old value is read by no later step,
its memory can hold the new one, which is what the NumPy code meant: the program's scratch
shrinks, and the values a loop reads and writes share cache lines.

A loop's stored value takes over the buffer `D` of one of its operands when
- the loop stores the value at the loop's own index (every axis of the iteration space, so
  the store is in the innermost loop; the loop may also reduce, but holds no running sum), and
  every load of `D` in the loop reads that same index: each element of `D` is read before the
  same element is written, and by the same iteration, so chunks run in parallel stay
  independent;
- `D` has the stored value's shape and dtype, is not an input, a constant, a program output or
  a view, has no view taken of it, and no later step reads it;
- `D` is scratch the program keeps between calls (a loop's or a matrix product's): not the
  result of an evaluation, a new array every call, whose pages a scatter into zeros leaves mostly
  untouched, so that writing a whole result into it costs a page fault per page (measured: the
  kernel that did so took 2.8 times as long as with its own, already mapped, buffer);
- the stored value is scratch too (a program output is allocated per call, and must not be a
  buffer the program keeps between calls).
"""

from __future__ import annotations

from dataclasses import replace

from ..fusion.steps import (
    Buffer,
    FusedLoop,
    Load,
    MatmulStep,
    Plan,
    Store,
    ViewStep,
    identity_index,
)


def donate(plan: Plan) -> Plan:
    """`plan` with the stored values of elementwise loops written over their dead operands."""
    produced = {}
    for step in plan.steps:
        for b in step.writes:
            produced[id(b)] = step
    viewed = {id(s.src) for s in plan.steps if isinstance(s, ViewStep)}
    outputs = {id(b) for b in plan.outputs}
    last_read = {}
    for j, step in enumerate(plan.steps):
        for b in step.reads:
            last_read[id(b)] = j

    def owned_scratch(b: Buffer) -> bool:
        if b.role != "temp" or id(b) in viewed or id(b) in outputs:
            return False
        # an evaluation's result is a new array every call: often mostly untouched pages (a
        # scatter into zeros), where writing a whole result would fault every page in
        return isinstance(produced.get(id(b)), FusedLoop | MatmulStep)

    renamed: dict[int, Buffer] = {}
    for j, step in enumerate(plan.steps):
        if not isinstance(step, FusedLoop) or step.scans:
            continue
        own = identity_index(len(step.shape))
        loads: dict[int, list[Load]] = {}
        for op in step.ops:
            if isinstance(op, Load):
                loads.setdefault(id(op.buffer), []).append(op)
        taken: set[int] = set()
        for s in step.stores:
            out = s.buffer
            if s.index != own or out.shape != step.shape or not owned_scratch(out):
                continue
            for donor_id, ops in loads.items():
                donor = ops[0].buffer
                if (
                    donor_id in taken
                    or donor.shape != out.shape
                    or donor.dtype != out.dtype
                    or last_read.get(donor_id) != j
                    or not owned_scratch(donor)
                    or any(op.index != own for op in ops)
                ):
                    continue
                taken.add(donor_id)
                # a donor may itself hold an earlier loop's value: the chain shares one buffer
                renamed[id(out)] = renamed.get(donor_id, donor)
                break
    if not renamed:
        return plan
    return _renamed(plan, renamed)


def _renamed(plan: Plan, renamed: dict[int, Buffer]) -> Plan:
    def b(buffer: Buffer) -> Buffer:
        return renamed.get(id(buffer), buffer)

    steps = []
    for step in plan.steps:
        if isinstance(step, FusedLoop):
            ops = [
                replace(op, buffer=b(op.buffer)) if isinstance(op, Load) else op for op in step.ops
            ]
            stores = [Store(s.value, b(s.buffer), s.index) for s in step.stores]
            steps.append(replace(step, ops=ops, stores=stores))
        elif isinstance(step, MatmulStep):
            steps.append(replace(step, out=b(step.out), a=b(step.a), b=b(step.b)))
        elif isinstance(step, ViewStep):
            steps.append(replace(step, src=b(step.src)))
        else:
            steps.append(replace(step, args=[b(a) for a in step.args]))
    buffers = [x for x in plan.buffers if id(x) not in renamed]
    return Plan(plan.graph, buffers, plan.inputs, [b(x) for x in plan.outputs], steps)
