"""What a refusal says when STIR itself runs the file with stirgpu's plugin.

The PLS prior and the kinetic-model objective functions (POSMAPOSL, POSSPS) are STIR's own
algorithms that stirgpu does not reimplement (KOSMAPOSL it does: ``stirgpu kosmaposl``), but
STIR's executables run them with stirgpu's projectors through the plugin (``stirgpu stir PROGRAM FILE.par``, with
``projector pair type := stirgpu`` in the file).  The refusal names that command.
"""

from __future__ import annotations

__all__ = ["plugin_hint"]


def plugin_hint(program: str, path: str | None) -> str:
    """``STIR runs it with stirgpu's plugin: stirgpu stir KOSMAPOSL recon.par (projecting with
    stirgpu where the file says 'projector pair type := stirgpu')``."""
    name = path if path is not None else "FILE.par"
    return (
        f"STIR runs it with stirgpu's plugin: stirgpu stir {program} {name} "
        "(projecting with stirgpu where the file says 'projector pair type := stirgpu')"
    )
