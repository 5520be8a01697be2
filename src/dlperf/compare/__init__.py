"""``dlperf compare``: did B get faster or slower than A, and is the difference real?

``sides`` reads what each side names (a store, a report's results.json, a selection),
``stats`` gives the ratio's confidence interval over worker processes, ``verdicts``
matches configurations and judges each, ``output`` renders the outcome. Imports no
framework; reads no store in place (a store is copied before it is read).
"""
