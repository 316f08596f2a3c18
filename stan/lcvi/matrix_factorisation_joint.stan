// Probabilistic matrix factorisation Y[i, j] ~ N((U V')[i, j], noise_sd^2) on
// the N training cells, normal(0, prior_sd) priors on all entries of U (I x K)
// and V (J x K), with the LCVI utility term added to the target, for the
// paper's joint optimisation (stanflow/lcvi/joint.py): the decisions h and the
// outcome base samples eps_y are parameters besides U and V, so that one
// gradient call at (U, V, h, eps_y) gives the gradient in U, V and h of
//   log p(U, V, y) + weight * utility_term(l(y[s] | U, V, h)),
//   y[s, n] = (U V')[cell[n]] + noise_sd * eps_y[s, n].
// eps_y is drawn afresh by the optimiser at every step; its gradient is not
// used. Cells are column-major indices into the I x J matrix. Slot
// (docs/lcvi.md):
//   loss.stanfunctions: real loss(real y, real f, vector loss_params)
functions {
  #include utility.stanfunctions // includes the slot loss.stanfunctions
}
data {
  int<lower=1> I; // rows (users)
  int<lower=1> J; // columns (items)
  int<lower=1> K; // latent dimension
  int<lower=1> N; // training cells, and decisions
  array[N] int<lower=1, upper=I * J> cell; // column-major cell indices
  vector[N] y; // observed values of the training cells
  real<lower=0> prior_sd;
  real<lower=0> noise_sd;
  int<lower=1> S; // outcome samples per draw of (U, V)
  int<lower=0> n_loss_params;
  vector[n_loss_params] loss_params;
  int<lower=1, upper=2> utility; // 1: M - l, 2: exp(-gamma l)
  real<lower=0> scale; // M or gamma
  int<lower=1, upper=2> estimator; // 1: naive, 2: linearised
  real<lower=0> weight; // weight of the utility term; 0: plain VI
}
parameters {
  matrix[I, K] U;
  matrix[J, K] V;
  vector[N] h; // decisions, one per training cell
  matrix[S, N] eps_y; // standard normal base samples of the outcomes
}
model {
  vector[N] loc = to_vector(U * V')[cell];
  to_vector(U) ~ normal(0, prior_sd);
  to_vector(V) ~ normal(0, prior_sd);
  y ~ normal(loc, noise_sd);
  if (weight > 0) {
    target += weight
              * utility_term(outcome_losses(loc, rep_vector(noise_sd, N),
                                            eps_y, h, loss_params),
                             utility, scale, estimator);
  }
}
