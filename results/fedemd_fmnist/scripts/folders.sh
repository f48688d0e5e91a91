# Where each run folder of run_chain.sh (runs/<name>/) is committed under results/.
# Sourced by run_chain.sh and collect.sh.
declare -A RESULT_OF=(
  [fedemd_fmnist_text_round_lr]=fedemd_fmnist/text_reading_lr_per_round_default/table1
  [fedemd_fmnist_text_fig4]=fedemd_fmnist/text_reading_lr_per_round_default/fig4
  [fedemd_fmnist_text_round_lr_nostep]=fedemd_fmnist/text_reading_lr_per_round_default/diagnosis_no_lr_step
  [fedemd_fmnist_text_round_lr_mean]=fedemd_fmnist/text_reading_lr_per_round_default/diagnosis_plain_mean
  [fedemd_fmnist_text_round_lr_svb]=fedemd_fmnist/text_reading_lr_per_round_default/svb
  [fedemd_fmnist_text]=fedemd_fmnist/text_reading_lr_per_participation/table1
  [fedemd_fmnist_text_fig4_pp]=fedemd_fmnist/text_reading_lr_per_participation/fig4
)
