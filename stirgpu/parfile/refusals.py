"""What a refusal says when STIR itself runs the file with stirgpu's plugin.

The PLS prior, the kinetic-model objective functions (POSMAPOSL, POSSPS) and KOSMAPOSL's kernel
of more than one feature element (``stirgpu kosmaposl`` runs the rest of KOSMAPOSL) are STIR's
own algorithms that stirgpu does not reimplement, but STIR's executables run them with
stirgpu's projectors through the plugin (``stirgpu stir PROGRAM FILE.par``, with
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
