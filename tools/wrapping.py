"""Development helper of the probes that annotate a run (``tools/gap_timeline.py``,
``tools/host_marks.py``): a module's function, or a class's method (classmethods included),
replaced by a wrapper around it.  Imported by those scripts (``tools/`` is their path's
first entry)."""


def wrap_function(module, name, make):
    """Replace ``module``'s function ``name`` (``"Class.method"`` for a method) by
    ``make(label, fn)``, ``label`` being ``"<module's last part>.<name>"``."""
    owner, attr = module, name
    if "." in name:
        cls, attr = name.split(".")
        owner = getattr(module, cls)
    fn = getattr(owner, attr)
    wrapped = make(f"{module.__name__.rsplit('.', 1)[-1]}.{name}", fn)
    if isinstance(owner.__dict__.get(attr), classmethod):
        setattr(owner, attr, classmethod(lambda cls_, *a, **k: wrapped(*a, **k)))
    else:
        setattr(owner, attr, wrapped)
