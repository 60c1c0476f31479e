"""DataLoader benchmarks from the shell: ``dlwatch probe bench``, ``autotune``, ``seed-check``.

Each configuration runs in a fresh subprocess (:mod:`probes.bench.child`) while the parent
samples its process tree with the watchdog's own collectors (one implementation of process
observation in the project). Modules: ``datasets`` (synthetic and user datasets), ``grid``
(configurations), ``measure`` (run one configuration), ``machine`` (the machine's
description), ``output`` (table, JSON, CSV, plot), ``commands`` (the three commands).
"""
