const fs = require('node:fs');

const answers = JSON.parse(process.env.KILN_ANSWERS);
// progress, a log line, or a question: one JSON object per line
const say = (line) => fs.writeSync(Number(process.env.KILN_TALK_FD), JSON.stringify(line) + '\n');
// the answer, or undefined once asked (then end the run)
const ask = (key, question) => {
  if (!(key in answers)) say({ask: key, ...question});
  return answers[key];
};

const {amount} = JSON.parse(fs.readFileSync(0, 'utf8'));
say({progress: 1, total: 3, message: 'looking up accounts'});
const accounts = ['checking', 'savings', 'brokerage']; // same every run: the question must not change
const form = {type: 'object', properties: {account: {type: 'string', enum: accounts}}};
const pick = ask('account', {elicitation: {message: `Pay ${amount} from?`, requestedSchema: form}});
if (pick === undefined) process.exit(0); // Kiln returns the question; the next call runs this again
if (pick.action !== 'accept') {
  console.error(`Nothing paid: the user chose ${pick.action}`);
  process.exit(1);
}
say({log: 'info', data: `paying ${amount} from ${pick.content.account}`});
say({progress: 3, total: 3});
console.log(`Paid ${amount} from ${pick.content.account}`);
