"""The Slurm executor: a sweep's runs as array jobs on a cluster (``driver``), what each
job runs on its node (``job``), the folder they share (``batch``), the Slurm commands
(``commands``) and the settings (``settings``). docs/cluster.md says how to use it."""
