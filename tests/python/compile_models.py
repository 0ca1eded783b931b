"""Moved to torch_ort_backend.testing.models (issue 17). This name stays, as that module itself,
only until every importer has moved; import torch_ort_backend.testing.models instead."""

import sys

from torch_ort_backend.testing import models

sys.modules[__name__] = models
