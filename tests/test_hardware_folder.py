"""harmony.metrics.hardware_mismatch: a device call files records only into the folder of its hardware."""
from harmony.metrics import hardware_mismatch, hardware_tag

H100x2 = {"gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 2}
H200x2 = {"gpu": "NVIDIA H200", "gpu_count": 2}


def test_the_folder_names_are_hardware_tags():
    assert hardware_tag(H200x2) == "2xH200"
    assert hardware_tag({"gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 1}) == "1xH100-80GB-HBM3"
    assert hardware_tag({"gpu": None}) == "cpu"


def test_matching_hardware_may_write():
    assert hardware_mismatch(H200x2, "results/paper/2xH200") is None
    assert hardware_mismatch(H200x2, "results/paper/2xH200/") is None
    # one GPU of a two-GPU host (CUDA_VISIBLE_DEVICES=0): the environment record counts what is visible
    assert hardware_mismatch({**H100x2, "gpu_count": 1}, "results/paper/1xH100-80GB-HBM3") is None


def test_other_cards_or_another_count_are_refused_with_the_way_out():
    why = hardware_mismatch(H100x2, "results/paper/2xH200")      # x2-ncclab1: asked for H200s, got H100s
    assert why and "2xH100-80GB-HBM3" in why and "2xH200" in why
    assert "results/paper/2xH100-80GB-HBM3" in why and "ALLOW_OTHER_HW=1" in why
    assert hardware_mismatch(H100x2, "results/paper/1xH100-80GB-HBM3")          # two visible, folder for one
    assert hardware_mismatch({"gpu": None}, "results/paper/2xH200")             # no GPU at all


def test_folders_not_named_for_hardware_are_not_checked():
    for folder in ("results/smoke/cpu", "/tmp/scratch", "results/paper/remeasure-x"):
        assert hardware_mismatch(H100x2, folder) is None
