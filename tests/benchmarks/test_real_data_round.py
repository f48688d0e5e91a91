"""benchmarks/real_data_round: its arguments (a full measurement takes minutes of CNN rounds on
the real Fashion-MNIST and is recorded in BUILD_NOTES, issue 15)."""

import pytest

from benchmarks import real_data_round


@pytest.mark.parametrize(
  "args,message",
  [
    (["--cells=fedgs_cifar"], "--cells='fedgs_cifar'; allowed: any of fedgs_fmnist, fedemd_fmnist"),
    (["--cells="], "--cells=''"),
    (["--rounds=0"], "--rounds=0; allowed: integers >= 1"),
    (["--client_accuracy=off"], "--client_accuracy='off'; allowed: study, compare"),
  ],
)
def test_bad_arguments_name_the_value(capsys, args, message):
  with pytest.raises(SystemExit) as err:
    real_data_round.main(args)
  assert err.value.code == 2
  assert message in capsys.readouterr().err
