// Eight schools, centred (mu ~ N(0, 5), tau ~ half-Cauchy(0, 5)), with the LCVI
// utility term added to the target, for the paper's joint optimisation
// (stanflow/lcvi/joint.py): the decisions h and the outcome base samples eps_y
// are parameters besides the model's, so that one gradient call at
// (mu, tau, theta, h, eps_y) gives the gradient in the model's parameters and
// in h of
//   log p(mu, tau, theta, y) + weight * utility_term(l(y[s] | theta, h)),
//   y[s, j] = theta[j] + sigma[j] * eps_y[s, j].
// eps_y is drawn afresh by the optimiser at every step; its gradient is not
// used. Slot (docs/lcvi.md):
//   loss.stanfunctions: real loss(real y, real f, vector loss_params)
functions {
  #include utility.stanfunctions // includes the slot loss.stanfunctions
}
data {
  int<lower=0> J; // number of schools
  vector[J] y; // estimated treatment effects
  vector<lower=0>[J] sigma; // standard errors of the estimates
  int<lower=1> S; // outcome samples per theta
  int<lower=0> n_loss_params;
  vector[n_loss_params] loss_params;
  int<lower=1, upper=2> utility; // 1: M - l, 2: exp(-gamma l)
  real<lower=0> scale; // M or gamma
  int<lower=1, upper=2> estimator; // 1: naive, 2: linearised
  real<lower=0> weight; // weight of the utility term; 0: plain VI
}
parameters {
  real mu;
  real<lower=0> tau;
  vector[J] theta;
  vector[J] h; // decisions, one per school
  matrix[S, J] eps_y; // standard normal base samples of the outcomes
}
model {
  mu ~ normal(0, 5);
  tau ~ cauchy(0, 5);
  theta ~ normal(mu, tau);
  y ~ normal(theta, sigma);
  if (weight > 0) {
    target += weight
              * utility_term(outcome_losses(theta, sigma, eps_y, h,
                                            loss_params),
                             utility, scale, estimator);
  }
}
