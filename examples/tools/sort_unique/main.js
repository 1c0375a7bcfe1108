const fs = require('node:fs');
const _ = require('lodash');

const args = JSON.parse(fs.readFileSync(0, 'utf8'));
console.log(JSON.stringify({ sorted: _.sortBy(_.uniq(args.numbers)) }));
