"""Traffic mirroring (docs/mirroring.md): the area (area.py), the shadow call (shadow.py) and
the comparison route (routes.py)."""
