// Expected losses of N decisions, each over its own S outcome samples, for the
// numerical Bayes decisions of a loss given only as a Stan file
// (stanflow/lcvi/numeric_decisions.py):
//   expected_loss[n] = (1/S) sum_s loss(Y[s, n], h[n]),
// with the parameters h the decisions and the target -sum_n expected_loss[n],
// so that one param_constrain call (transformed parameters included) gives the
// N expected losses at N decisions, and the gradient of the target gives
// -d expected_loss[n] / d h[n]. Slot (docs/your-own-loss.md):
//   loss.stanfunctions: real loss(real y, real f, vector loss_params)
functions {
  #include loss.stanfunctions
}
data {
  int<lower=1> S; // outcome samples per decision
  int<lower=1> N; // decisions
  matrix[S, N] Y; // the samples of decision n are column n
  int<lower=0> n_loss_params;
  vector[n_loss_params] loss_params;
}
parameters {
  vector[N] h; // the decisions (unconstrained)
}
transformed parameters {
  vector[N] expected_loss = rep_vector(0, N);
  for (n in 1 : N) {
    for (s in 1 : S) {
      expected_loss[n] += loss(Y[s, n], h[n], loss_params);
    }
  }
  expected_loss /= S;
}
model {
  target += -sum(expected_loss);
}
