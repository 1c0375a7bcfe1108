// Evaluates IAM requests with @cloud-copilot/iam-simulate: one JSON simulation per stdin line
// ({"id", "identityPolicies", "resourcePolicy", "request"}), one JSON answer per stdout line
// ({"id", "result": "Allowed" | "ImplicitlyDenied" | "ExplicitlyDenied", "errors"}).
import { createInterface } from 'node:readline'
import { runSimulation } from '@cloud-copilot/iam-simulate'

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity })
for await (const line of lines) {
  if (!line.trim()) continue
  const { id, ...simulation } = JSON.parse(line)
  let answer
  try {
    const outcome = await runSimulation(
      { serviceControlPolicies: [], resourceControlPolicies: [], ...simulation },
      {}
    )
    answer =
      outcome.resultType === 'error'
        ? { id, result: 'Invalid', errors: outcome.errors }
        : {
            id,
            result: outcome.overallResult,
            ignoredContextKeys: outcome.result?.ignoredContextKeys ?? []
          }
  } catch (error) {
    answer = { id, result: 'Invalid', errors: String(error) }
  }
  process.stdout.write(JSON.stringify(answer) + '\n')
}
