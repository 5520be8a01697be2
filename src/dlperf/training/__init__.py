"""Training to a quality target: the rule (``rules``: goals, budget, options in force), the
quality measures on held-out data (``quality``) and the single-process loop run inside a
worker (``loop``). ``dlperf train`` and ``dlperf parallel --target-accuracy`` share the
rule; nothing here but ``loop`` runs a framework, and ``loop`` only through the backend
it is handed.
"""
