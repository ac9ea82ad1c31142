"""``fedxab reproduce NAME``: the figures of the federated papers, one command each.

One module per step:

- :mod:`~fedxab.reproduce.experiments`: the catalogue, one :class:`Experiment` per figure (an
  objective, a budget T, M clients and one :class:`Entry` per algorithm, with the paper's
  hyper-parameters);
- :mod:`~fedxab.reproduce.plan`: :func:`make_plan` turns an experiment into one validated
  :class:`~fedxab.config.Config` per entry (``--seeds``, ``--budget``, ``--clients``,
  ``--output`` overrides); :func:`pilot` times one short run per entry to estimate the wall time;
- :mod:`~fedxab.reproduce.execute`: :func:`run_plan` runs every entry over the seeds through
  :func:`fedxab.agents.federation.run_federated_config` and writes
  ``OUTPUT/<entry>/results.json``;
- :mod:`~fedxab.reproduce.figures`: :func:`plot_plan` draws all entries in one figure,
  mean ± 1 std over seeds, as the papers do;
- :mod:`~fedxab.reproduce.tables`: the manifest ``OUTPUT/reproduce.json`` and the DP-FTS-DE
  figures' privacy-utility table (:func:`write_privacy_utility`).

The package only logs; the ``fedxab reproduce`` command in :mod:`fedxab.cli` prints (the
estimate, a progress bar, a summary table).
"""

from fedxab.reproduce.execute import (
    SIMPLE_REGRET_FILENAME,
    EntryResult,
    load_plan_results,
    run_plan,
)
from fedxab.reproduce.experiments import (
    EXPERIMENTS,
    Entry,
    Experiment,
    ReproduceError,
    get_experiment,
)
from fedxab.reproduce.figures import plot_plan
from fedxab.reproduce.plan import Plan, PlannedEntry, make_plan, pilot
from fedxab.reproduce.tables import (
    PRIVACY_UTILITY_JSON,
    PRIVACY_UTILITY_MD,
    privacy_utility,
    write_privacy_utility,
)

__all__ = [
    "EXPERIMENTS",
    "PRIVACY_UTILITY_JSON",
    "PRIVACY_UTILITY_MD",
    "SIMPLE_REGRET_FILENAME",
    "Entry",
    "EntryResult",
    "Experiment",
    "Plan",
    "PlannedEntry",
    "ReproduceError",
    "get_experiment",
    "load_plan_results",
    "make_plan",
    "pilot",
    "plot_plan",
    "privacy_utility",
    "run_plan",
    "write_privacy_utility",
]
