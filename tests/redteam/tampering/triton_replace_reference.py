# expect: tripwire:monkeypatch tripwire:introspection verdict:incorrect
# Plants a reference that returns whatever is in the output, and an engine whose comparison, oracles and
# poison agree with anything, in sys.modules and in the engine's own modules, before any checker imports
# them; then writes zeros.
import sys
import types

import crucible.toolkit.checking as checking
import crucible.toolkit.oracles as oracles
from crucible.toolkit.results import OutputCheck


def _agree(name, out, ref, atol, rtol):
    return OutputCheck(name=name, ok=True, max_abs_err=0.0, max_rel_err=0.0, mismatched=0, total=out.numel(),
                       unwritten=0, atol=atol, rtol=rtol)


_fake = types.ModuleType("crucible_reference")
_fake.make_inputs = lambda config, gen, device: {}
_fake.reference = lambda x, y, *, N: 2 * x + y - x - x - y  # zeros, like the output
for name in ("crucible_reference", "reference"):
    sys.modules[name] = _fake
checking.compare = _agree
checking.poison_ = lambda t: None
oracles.precision_findings = lambda *a, **k: []
oracles.nondeterminism_findings = lambda *a, **k: []
oracles.float64_reference = lambda fn, inputs, params, names=(): []


def vadd(x, y, out, *, N):
    out.zero_()
