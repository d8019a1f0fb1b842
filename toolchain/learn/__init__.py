"""Online learners: the learner as IR (``spec``), its bit-exact trajectory (``emulate``), actor-critic on the
fixed-point learner (``a2c``), the ``learn`` command (``commands``) and the online-learning benchmark (``bench``).

``spec`` and ``emulate`` import nothing from backends, verify or flows (the RTL backend imports them);
``commands``, ``bench`` and ``a2c`` sit on top and may import everything below.
"""
