// Gibbs posterior for a location parameter theta (median, quantile, mean, ...),
// a loss program (docs/your-own-model.md):
//   target += -omega * sum_i weights[i] * loss(y[i], theta, loss_params)
//             + log_prior([theta]', prior_params)
// with theta in [lower_bound, upper_bound]. Slots (docs/gibbs.md):
//   loss.stanfunctions:  real loss(real y, real f, vector loss_params)
//   prior.stanfunctions: real log_prior(vector theta, vector prior_params)
functions {
  #include loss.stanfunctions
  #include prior.stanfunctions
}
data {
  int<lower=1> N;
  vector[N] y;
  real<lower=0> omega;
  vector<lower=0>[N] weights;
  int<lower=0> n_loss_params;
  vector[n_loss_params] loss_params;
  int<lower=0> n_prior_params;
  vector[n_prior_params] prior_params;
  real lower_bound;
  real<lower=lower_bound> upper_bound;
}
parameters {
  real<lower=lower_bound, upper=upper_bound> theta;
}
model {
  real total_loss = 0;
  for (i in 1 : N) {
    total_loss += weights[i] * loss(y[i], theta, loss_params);
  }
  target += -omega * total_loss + log_prior([theta]', prior_params);
}
