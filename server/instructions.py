"""The server's instructions: what an MCP client shows the agent about how to work with these tools."""

INSTRUCTIONS = """\
You are optimizing one GPU kernel. The tools evaluate the source files of your workspace as they are on disk \
when you call them.

How to work:
1. Call get_task once: the statement, the entry point's exact signature, the visible configs, the \
tolerances, the device and the limits. The file to edit is `candidate_file` in the workspace.
2. Edit the candidate file with your own file tools. Keep the entry point's signature.
3. compile: does it build for the target; the compiler's errors with file:line; registers, shared memory \
and spills per kernel.
4. run_tests: correctness on the visible configs (several random seeds), then a quick timing against the \
baseline. Pass `configs` to test a few configs while iterating.
5. profile: careful timing of one config, which kernels ran and for how long, the roofline fraction; \
hardware counters with ncu=true where available.
6. submit: records the current workspace as your answer and re-checks it on the visible configs. You may \
submit several times; the LAST submission counts, so submit again after any improvement, and never \
submit a version you have not tested.

Rules:
- Hidden configs (other shapes, sizes that are not multiples of your block size, other dtypes) are scored \
after the session. Do not hard-code the visible shapes: handle any size the signature allows.
- Compute the result yourself: do not call the reference, PyTorch operators that do the work, or the \
baseline from your kernel. Do not read or modify anything outside your workspace.
- Results are checked against cheating: inputs change between calls (at the same addresses too), outputs are compared with a float64 reference, the kernels that ran are profiled, the timer is out of your reach. A caught shortcut (cached results, lower precision than the task's dtype, work on another stream, patched functions, exiting early) makes the final verdict `flagged` and earns nothing; run_tests lists what the checks saw under each config's `integrity`.
- A tool result with isError=true means the call could not do its job (your code does not compile, \
crashed, hung, or an argument was wrong): the message says what happened and what to do. A kernel that \
runs but gives wrong answers is a normal result with correct=false and the first mismatch.
- Only one evaluation runs at a time; a second call waits for the first. Each tool call has a time limit \
(get_task's `limits.tool_limits_s`).
"""
