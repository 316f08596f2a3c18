  // stanflow's LCVI data (docs/your-own-model.md, "LCVI"): stanflow sets them.
  int<lower=1> lcvi_S; // outcome samples per draw of the parameters
  int<lower=1> lcvi_N; // decisions
  matrix[lcvi_S, lcvi_N] lcvi_z; // standard normal base samples of the outcomes
  matrix<lower=0, upper=1>[lcvi_S, lcvi_N] lcvi_u; // uniform base samples
  vector[lcvi_N] lcvi_h; // the decisions
  int<lower=9> lcvi_size;
  vector[lcvi_size] lcvi; // the utility term's settings
