"""A real nginx edge in front of the lab: the network-level faults reproduced by nginx's own directives.

- :mod:`latscope.lab.edge.config` — :class:`EdgeConfig`, the edge's settings; ``EdgeConfig.from_faults`` maps lab
  fault names to nginx directives.
- :mod:`latscope.lab.edge.nginx` — :class:`NginxEdge`, nginx in a private prefix in front of a lab origin.
- :mod:`latscope.lab.edge.lab` — :class:`EdgeLab`, a lab origin (origin-side faults) behind an nginx edge (edge
  faults), what ``latscope lab --edge nginx`` serves.
- :mod:`latscope.lab.edge.errors` — :class:`EdgeError` and its kinds (nginx missing, nginx failing to start).

Nothing is imported here, so importing the errors stays as cheap as the command line needs.
"""
