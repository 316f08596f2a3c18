// Weighted penalised M-estimation for one weighted Bayesian bootstrap draw
// (docs/wbb.md), solved by CmdStan's optimize (L-BFGS):
//   minimise  sum_i w[i] * loss(y[i], alpha + X[i] * beta, loss_params)
//             + lambda * w_prior * penalty(beta, penalty_params)
// with an unpenalised intercept alpha when fit_intercept = 1. The weights are
// data, so one compiled model serves every draw. Slots:
//   loss.stanfunctions:    real loss(real y, real f, vector loss_params)
//                          (the Gibbs losses in stan/losses fit)
//   penalty.stanfunctions: real penalty(vector beta, vector penalty_params)
//                          (smooth; stan/wbb/penalties)
functions {
  #include loss.stanfunctions
  #include penalty.stanfunctions
}
data {
  int<lower=1> N;
  int<lower=1> K;
  matrix[N, K] X;
  vector[N] y;
  vector<lower=0>[N] w;
  real<lower=0> w_prior;
  real<lower=0> lambda;
  int<lower=0, upper=1> fit_intercept;
  int<lower=0> n_loss_params;
  vector[n_loss_params] loss_params;
  int<lower=0> n_penalty_params;
  vector[n_penalty_params] penalty_params;
}
parameters {
  vector[fit_intercept] alpha;
  vector[K] beta;
}
model {
  vector[N] f = X * beta;
  if (fit_intercept) {
    f += alpha[1];
  }
  real total_loss = 0;
  for (i in 1 : N) {
    total_loss += w[i] * loss(y[i], f[i], loss_params);
  }
  target += -total_loss - lambda * w_prior * penalty(beta, penalty_params);
}
