from conftest import AwsStack


def test_fresh_stack_has_an_empty_table_and_bucket(aws: AwsStack) -> None:
    items = aws.clients.dynamodb.scan(TableName=aws.table)["Items"]
    objects = aws.clients.s3.list_objects_v2(Bucket=aws.bucket).get("KeyCount")
    # only the marks that its listing directories are complete (kiln.aws.directory) and that
    # every ledger day records its shards (kiln.accounting.ledger_shards)
    assert {(i["pk"]["S"], i["sk"]["S"]) for i in items} == {
        ("DIR#keys", "#complete"),
        ("DIR#bundles", "#complete"),
        ("LEDGERSUM#SHARDS", "SINCE"),
    }
    assert objects == 0
