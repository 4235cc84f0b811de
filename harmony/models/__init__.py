"""The model zoo: importing a family module registers its named configurations."""
from harmony.models.base import ModelSpec, TensorSpec, get_model, list_models, paper_facts, run_chain  # noqa: F401
from harmony.models import mlp  # noqa: F401  (test model)
from harmony.models import bert, gpt2, resnet, vgg  # noqa: F401,E402  (the paper's families)
