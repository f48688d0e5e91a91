"""FedGS (Wang et al., AAAI 2023) Synthetic set-up: Synthetic(0.5, 0.5), 30 clients,
20 % sampled, E = 10 local steps, B = 10, lr 0.1 decayed 0.998 per round, 1000 rounds."""

from fedjax_sel.experiment import default_config


def get_config():
  c = default_config()
  c.num_clients = 30
  c.clients_per_round = 6
  c.local_steps = 10
  c.batch_size = 10
  c.client_lr = 0.1
  c.lr_decay = 0.998
  c.rounds = 1000
  c.eval_every = 10
  c.selection = "fedgs"
  c.availability = "ln"
  c.availability_hparams.beta = 0.5
  return c
