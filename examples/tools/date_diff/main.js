const fs = require('node:fs');

const args = JSON.parse(fs.readFileSync(0, 'utf8'));
const start = new Date(`${args.start}T00:00:00Z`);
const end = new Date(`${args.end}T00:00:00Z`);
if (Number.isNaN(start.getTime()) || Number.isNaN(end.getTime())) {
  console.error('start and end must be real calendar dates (YYYY-MM-DD)');
  process.exit(2);
}
const day = 24 * 60 * 60 * 1000;
const days = Math.round((end - start) / day);
let working = 0;
const step = days >= 0 ? 1 : -1;
for (let i = 0; i !== days; i += step) {
  const weekday = new Date(start.getTime() + i * day).getUTCDay();
  if (weekday !== 0 && weekday !== 6) working += step;
}
console.log(JSON.stringify({ start: args.start, end: args.end, days, working_days: working }));
