// Gibbs posterior for the coefficients beta of a linear predictor f = X * beta
// (quantile regression, robust regression, linear classifiers, ...), a loss
// program (docs/your-own-model.md):
//   target += -omega * sum_i weights[i] * loss(y[i], f[i], loss_params)
//             + log_prior(beta, prior_params)
// with beta in [lower_bound, upper_bound] elementwise. Slots (docs/gibbs.md):
//   loss.stanfunctions:  real loss(real y, real f, vector loss_params)
//   prior.stanfunctions: real log_prior(vector theta, vector prior_params)
functions {
  #include loss.stanfunctions
  #include prior.stanfunctions
}
data {
  int<lower=1> N;
  int<lower=1> K;
  matrix[N, K] X;
  vector[N] y;
  real<lower=0> omega;
  vector<lower=0>[N] weights;
  int<lower=0> n_loss_params;
  vector[n_loss_params] loss_params;
  int<lower=0> n_prior_params;
  vector[n_prior_params] prior_params;
  vector[K] lower_bound;
  vector<lower=lower_bound>[K] upper_bound;
}
parameters {
  vector<lower=lower_bound, upper=upper_bound>[K] beta;
}
model {
  vector[N] f = X * beta;
  real total_loss = 0;
  for (i in 1 : N) {
    total_loss += weights[i] * loss(y[i], f[i], loss_params);
  }
  target += -omega * total_loss + log_prior(beta, prior_params);
}
